"""`hltm mcp` (the MCP server) and `hltm settings` (the effective configuration)."""

from __future__ import annotations

import json
from dataclasses import asdict, fields
from typing import Any

import click

from hltm_cli.common import fail, settings, uses_data

# Words that make a field a secret (whole words of its name: `llm_max_tokens_cap` is not one).
_SECRET_WORDS = {"key", "token", "secret", "password"}


def effective_settings() -> dict[str, dict[str, dict[str, Any]]]:
    """{section: {variable: {"field", "value", "source", "help"?}}}: every setting as the
    platform uses it, by the variable a user sets, with the field that holds it (the core
    `Settings`' or the component's) and whether the value came from the environment."""
    from hltm.evaluation.judge.tender import ReportSettings
    from hltm.judge.pipeline import DEFAULT_BUDGET, DEFAULT_WORKERS
    from hltm.judge.probe import ProbeSettings
    from hltm.llm import make_llm
    from hltm.patterns import PatternSettings
    from hltm.settings import (
        COMPONENT_ENV,
        CORE_FIELD_ENV,
        DEFAULT_JUDGE_CRON,
        mask,
        read_env,
        set_in_env,
    )

    core = settings()
    out: dict[str, dict[str, dict[str, Any]]] = {"core": {}}
    for f in fields(core):
        value = getattr(core, f.name)
        secret = bool(_SECRET_WORDS & set(f.name.split("_")))
        out["core"][CORE_FIELD_ENV[f.name]] = {
            "field": f.name,
            "value": mask(value) if secret else _shown(value),
            "source": "env" if set_in_env(CORE_FIELD_ENV[f.name]) else "default",
        }
    judge_defaults = {
        "budget": DEFAULT_BUDGET,
        "workers": DEFAULT_WORKERS,
        "extra_formal_patterns": [],
        "cron": DEFAULT_JUDGE_CRON,
    }
    effective: dict[str, dict[str, Any]] = {
        "judge": judge_defaults | read_env(COMPONENT_ENV["judge"]),
        "probe": asdict(ProbeSettings.from_env()),
        "patterns": asdict(PatternSettings.from_env()),
        "stats": asdict(ReportSettings.from_env()),
        "api": {"token": read_env(COMPONENT_ENV["api"]).get("token")},
    }
    slots = make_llm(core).concurrency  # what 0 workers come to: as many as the LLM's slots
    for section in ("judge", "probe"):
        effective[section]["workers"] = effective[section]["workers"] or slots
    for section, table in COMPONENT_ENV.items():
        set_here = read_env(table)
        out[section] = {
            var.name: {
                "field": name,
                "value": mask(effective[section][name])
                if var.secret
                else _shown(effective[section][name]),
                "source": "env" if name in set_here else "default",
                "help": var.help,
            }
            for name, var in table.items()
        }
    return out


def _shown(value: Any) -> str:
    if isinstance(value, list | tuple):
        return ", ".join(map(str, value)) or "-"
    if isinstance(value, dict):
        return json.dumps(value) if value else "-"
    return "none" if value is None else str(value)


@click.command(name="settings")
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
def settings_command(as_json: bool) -> None:
    """Print the effective configuration (every HLTM_* setting; secrets masked)."""
    from hltm.settings import unknown_env

    try:
        shown = effective_settings()
    except ValueError as err:
        fail(str(err))
    unknown = unknown_env()
    if as_json:
        click.echo(json.dumps({**shown, "unknown_variables": unknown}, indent=1))
        return
    click.secho(f"{'variable':<30} {'field':<22} value (source)", bold=True)
    for section, rows in shown.items():
        click.secho(section, bold=True)
        for name, row in rows.items():
            click.echo(f"  {name:<28} {row['field']:<22} {row['value']} ({row['source']})")
    for name in unknown:
        click.secho(f"warning: {name} is set but no setting reads it", fg="yellow", err=True)


@click.command(name="mcp")
@click.option(
    "--transport",
    type=click.Choice(["stdio", "http"]),
    default="stdio",
    show_default=True,
    help="stdio: one caller, its token in HLTM_TOKEN; http: streamable HTTP at /mcp, a bearer "
    "token on every request.",
)
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8766, show_default=True, type=int)
@uses_data
def mcp_command(transport: str, host: str, port: int) -> None:
    """Serve the scoped memory query and the ranking lookup as MCP tools."""
    from hltm.query.engine import QueryEngine
    from hltm.serving.mcp_server import run
    from hltm.settings import API_ENV, read_env

    token = read_env(API_ENV).get("token")
    if transport == "http":
        if token:
            click.echo(
                "note: HLTM_TOKEN is not used over HTTP (each request brings its own)", err=True
            )
        click.echo(f"MCP endpoint on http://{host}:{port}/mcp (Ctrl-C to stop)", err=True)
    try:
        run(QueryEngine(settings()), transport, token=token, host=host, port=port)  # type: ignore[arg-type]
    except PermissionError as err:
        fail(str(err))


COMMANDS = [mcp_command, settings_command]
