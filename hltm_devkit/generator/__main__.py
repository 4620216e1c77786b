"""`python -m hltm_devkit.generator OUT_DIR [--seed N] [--size NAME]` writes a sample world."""

from hltm_devkit.generator import main

if __name__ == "__main__":
    main()
