from rekall.cli import main

raise SystemExit(main())
