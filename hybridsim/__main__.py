from hybridsim.cli import run

raise SystemExit(run())
