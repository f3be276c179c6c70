from rekall.quick import main

raise SystemExit(main())
