"""The `markbase` command line."""

from __future__ import annotations

import argparse
import sys


def build_parser() -> argparse.ArgumentParser:
    import markbase

    parser = argparse.ArgumentParser(prog="markbase", description="Native inference engine for Gemma 4 models.")
    parser.add_argument("--version", action="version", version=f"markbase {markbase.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.add_parser("devices", help="list the backends built into this installation",
                   description="List the backends built into this installation, in order of preference.")
    v = sub.add_parser("validate", help="check a checkpoint directory for completeness and integrity",
                       description="Check a checkpoint against the weight table of its config.json: missing, "
                                   "unexpected and misshapen tensors, unreadable shards, NaN/Inf weights. "
                                   "Exits 0 when the checkpoint is sound, 1 otherwise.")
    v.add_argument("dir", help="checkpoint directory (config.json + *.safetensors)")
    v.add_argument("--no-values", action="store_true", help="skip the NaN/Inf scan of every weight")
    return parser


def main(argv: list[str] | None = None) -> int:
    import markbase

    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "devices":
            print("\n".join(markbase.devices()))
            return 0
        if args.command == "validate":
            report = markbase.validate(args.dir, scan_values=not args.no_values)
            sys.stdout.write(str(report))
            return 0 if report.ok else 1
    except markbase.MarkbaseError as e:
        print(f"markbase: error: {e}", file=sys.stderr)
        return 1
    parser.print_help(sys.stderr)
    return 2
