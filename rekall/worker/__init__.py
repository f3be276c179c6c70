"""The detached worker, one process per job: a pure policy (:mod:`rekall.worker.policy`) and a
small reactor (:mod:`rekall.worker.reactor`) that turns its decisions into commands.

Nothing is imported here: ``python -m rekall worker`` loads only what its first follow needs.
"""
