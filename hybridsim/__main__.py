from hybridsim.cli import main

raise SystemExit(main())
