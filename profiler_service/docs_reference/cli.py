"""docs/reference/cli.md: the `profiler-service` commands and options, from the CLI's parser."""

from __future__ import annotations

import argparse

from profiler_service.cli import build_parser
from profiler_service.docs_reference.markdown import code, table

INTRO = """# Command line

`profiler-service COMMAND [OPTIONS]`. Options that are also settings override their `PROFILER_`
variable ([configuration](configuration.md)). How each command is used:
[sidecar and agent](../sidecar-and-agent.md), [findings](../findings.md).

"""


def render() -> str:
    parser = build_parser()
    parts = [INTRO, "## Every command\n\n" + _options(parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            for name, sub in action.choices.items():
                parts.append(f"## {name}\n\n{_text(helps.get(name) or '')}.\n\n" + _options(sub))
    return "\n".join(parts)


def _options(parser: argparse.ArgumentParser) -> str:
    rows = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction | argparse._HelpAction):
            continue
        name = ", ".join(action.option_strings) or action.dest
        if action.choices:
            takes = " or ".join(code(c) for c in action.choices)
        elif action.nargs == 0:
            takes = ""
        else:
            takes = code(action.metavar or action.dest.upper())
        default = (
            code(action.default) if action.default not in (None, False, argparse.SUPPRESS) else ""
        )
        required = "required; " if action.required and action.option_strings else ""
        rows.append((code(name), takes, default, required + _text(action.help or "")))
    return table(["option", "takes", "default", "what"], rows)


def _text(text: str) -> str:
    return text.replace("%%", "%")
