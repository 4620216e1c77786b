"""One place for settings: every `HLTM_*` variable is read in `hltm/settings.py`, the components'
settings come from it, and `hltm settings` prints the effective configuration, secrets masked."""

from __future__ import annotations

import json
import re
from dataclasses import fields
from pathlib import Path

import pytest
from click.testing import CliRunner

from hltm.settings import COMPONENT_ENV, CORE_ENV_NAMES, CORE_FIELD_ENV, Settings, read_env
from tests.support import REPO

ROOT = REPO
CODE_DIRS = ("hltm", "hltm_cli", "hltm_dagster")
_NAME = re.compile(r"\bHLTM_[A-Z0-9_]*[A-Z0-9]\b")
_READS_ENV = re.compile(r"os\.environ|getenv")


def _code_files() -> list[Path]:
    files = [p for d in CODE_DIRS for p in (ROOT / d).rglob("*.py")]
    return files


def test_every_core_setting_names_its_variable() -> None:
    assert set(CORE_FIELD_ENV) == {f.name for f in fields(Settings)}


def test_every_hltm_variable_is_read_in_settings_and_listed() -> None:
    known = set(CORE_ENV_NAMES) | {v.name for t in COMPONENT_ENV.values() for v in t.values()}
    settings_py = ROOT / "hltm" / "settings.py"
    named_in_settings = set(_NAME.findall(settings_py.read_text(encoding="utf-8")))
    assert named_in_settings <= known, "a variable read in settings.py is missing from the lists"
    for path in _code_files():
        if path == settings_py:
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if _READS_ENV.search(line) and "HLTM_" in line:
                pytest.fail(f"{path.relative_to(ROOT)}:{number} reads an HLTM_* variable itself")


def test_components_take_their_values_from_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    from hltm.evaluation.judge.tender import ReportSettings
    from hltm.judge.probe import ProbeSettings
    from hltm.patterns import PatternSettings
    from hltm.settings import judge_cron
    from hltm_dagster.resources import JudgeSettingsResource

    for name, value in {
        "HLTM_JUDGE_BUDGET": "12",
        "HLTM_JUDGE_FORMAL_PATTERNS": "ready to relocate\n\nhas a car",
        "HLTM_JUDGE_CRON": "5 1 * * *",
        "HLTM_PROBE_SAMPLE_SIZE": "7",
        "HLTM_PROBE_WORKERS": "2",
        "HLTM_PATTERNS_AUTO_APPROVE": "yes",
        "HLTM_PATTERNS_MIN_SUPPORT": "4",
        "HLTM_TENDER_MODELS": "a, b",
        "HLTM_MODEL_PRICES": "a=1/2; b=3",
    }.items():
        monkeypatch.setenv(name, value)
    judge = JudgeSettingsResource.from_env()
    assert judge.budget == 12 and judge.workers == 0  # 0: as many as the LLM's slots
    assert judge.extra_formal_patterns == ["ready to relocate", "has a car"]
    assert judge_cron() == "5 1 * * *"
    probe = ProbeSettings.from_env()
    assert (probe.sample_size, probe.workers, probe.budget) == (7, 2, 12)  # budget: the judge's
    monkeypatch.setenv("HLTM_PROBE_BUDGET", "none")
    assert ProbeSettings.from_env().budget is None  # its own, unlimited
    patterns = PatternSettings.from_env()
    assert patterns.auto_approve and patterns.min_support == 4
    report = ReportSettings.from_env(seed=None)
    assert report.models == ("a", "b") and report.prices == {"a": (1.0, 2.0), "b": (3.0, 3.0)}
    assert read_env(COMPONENT_ENV["stats"]).keys() == {"models", "prices"}


def test_a_bad_value_names_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    from hltm.patterns import PatternSettings

    monkeypatch.setenv("HLTM_PATTERNS_MIN_SUPPORT", "three")
    with pytest.raises(ValueError, match="HLTM_PATTERNS_MIN_SUPPORT='three'"):
        PatternSettings.from_env()


def test_settings_command_prints_the_effective_configuration(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from hltm_cli import main

    secret_key, secret_token = "sk-test-0123456789", "hltm_secret-token-value"
    monkeypatch.setenv("HLTM_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("OPENAI_API_KEY", secret_key)
    monkeypatch.setenv("HLTM_TOKEN", secret_token)
    monkeypatch.setenv("HLTM_JUDGE_WORKERS", "3")
    monkeypatch.setenv("HLTM_JUDGE_BUGDET", "10")  # a typo
    monkeypatch.setenv("HLTM_LLM_MAX_TOKENS", "4096")
    monkeypatch.delenv("HLTM_LLM_MODEL", raising=False)
    out = CliRunner().invoke(main, ["settings"])
    assert out.exit_code == 0, out.output
    assert secret_key not in out.output and secret_token not in out.output
    assert re.search(r"HLTM_JUDGE_WORKERS\s+workers\s+3 \(env\)", out.output)
    assert re.search(r"HLTM_JUDGE_BUDGET\s+budget\s+3000 \(default\)", out.output)
    assert re.search(r"OPENAI_API_KEY\s+openai_api_key\s+\*\*\*", out.output)
    assert str(tmp_path) in out.output
    # the core section says where each value came from, and a token *count* is no secret
    assert re.search(r"HLTM_LLM_MAX_TOKENS\s+llm_max_tokens_cap\s+4096 \(env\)", out.output)
    assert re.search(r"HLTM_DATA_DIR\s+data_dir\s+\S+ \(env\)", out.output)
    assert re.search(r"HLTM_LLM_MODEL\s+llm_model\s+gpt-4o-mini \(default\)", out.output)
    assert "HLTM_JUDGE_BUGDET is set but no setting reads it" in out.output

    as_json = json.loads(CliRunner().invoke(main, ["settings", "--json"]).stdout)
    assert as_json["judge"]["HLTM_JUDGE_WORKERS"] == {
        "field": "workers",
        "value": "3",
        "source": "env",
        "help": COMPONENT_ENV["judge"]["workers"].help,
    }
    assert as_json["api"]["HLTM_TOKEN"]["value"].startswith("***")
    assert as_json["unknown_variables"] == ["HLTM_JUDGE_BUGDET"]

    monkeypatch.setenv("HLTM_PROBE_TOP_K", "ten")
    bad = CliRunner().invoke(main, ["settings"])
    assert bad.exit_code == 1 and "HLTM_PROBE_TOP_K='ten'" in bad.output
