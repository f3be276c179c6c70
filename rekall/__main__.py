import sys

if sys.argv[1:2] == ["worker"]:  # the detached worker, started by schedule: no CLI (argparse) to load first
    from rekall.worker_start import main

    raise SystemExit(main(sys.argv[2:]))

from rekall.quick import main

raise SystemExit(main())
