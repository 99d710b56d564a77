"""The `markbase` command line."""

from __future__ import annotations

import argparse
import sys


def build_parser() -> argparse.ArgumentParser:
    import markbase

    parser = argparse.ArgumentParser(prog="markbase", description="Native inference engine for Gemma 4 models.")
    parser.add_argument("--version", action="version", version=f"markbase {markbase.__version__}")
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("devices", help="list the backends built into this installation")
    return parser


def main(argv: list[str] | None = None) -> int:
    import markbase

    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "devices":
        print("\n".join(markbase.devices()))
        return 0
    parser.print_help(sys.stderr)
    return 2
