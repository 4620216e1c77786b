"""`python -m hltm.sources.generator OUT_DIR [--seed N] [--size NAME]` writes a sample world."""

from hltm.sources.generator import main

if __name__ == "__main__":
    main()
