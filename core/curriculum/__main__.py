"""python -m core.curriculum: the course map with each lesson's status, as text or JSON, or
apps/README.md regenerated."""

from __future__ import annotations

import argparse
import json
import sys

from core.curriculum.course import APPS_README, REPO_ROOT
from core.curriculum.views import apps_readme, course_map, format_map, format_summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m core.curriculum",
        description="Print the course map with each lesson's status (app present or missing).",
    )
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--json", action="store_true", help="print the map as JSON")
    group.add_argument("--summary", action="store_true", help="print counts per phase")
    group.add_argument(
        "--write-readme",
        action="store_true",
        help=f"regenerate {APPS_README.relative_to(REPO_ROOT)}",
    )
    args = parser.parse_args(argv)  # exits 2 with usage on bad arguments
    if args.json:
        print(json.dumps(course_map(), indent=2))
    elif args.summary:
        print(format_summary())
    elif args.write_readme:
        APPS_README.write_text(apps_readme(), encoding="utf-8")
        print(f"wrote {APPS_README.relative_to(REPO_ROOT)}")
    else:
        print(format_map())
    return 0


if __name__ == "__main__":
    sys.exit(main())
