import sys

if sys.argv[1:2] == ["worker"]:  # the detached worker, started by schedule: no CLI (argparse) to load first
    from rekall.worker.start import main

    raise SystemExit(main(sys.argv[2:]))

from rekall.surfaces.cli_entry import main

raise SystemExit(main())
