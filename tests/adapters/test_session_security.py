"""Every security rejection, against the simulator's real socket laid out as CODEX_HOME/ipc/ipc.sock."""

from __future__ import annotations

import os

import pytest

from rekall.adapters.extension import connect_thread
from rekall.sim import SimulatedOwner
from rekall.transports import EndpointInsecure, PeerMismatch, resolve_endpoint


@pytest.mark.anyio
async def test_a_socket_owned_by_another_user_is_refused():
    async with SimulatedOwner(codex_home=True) as sim:
        with pytest.raises(EndpointInsecure, match=f"owned by uid {os.geteuid()}, not by you"):
            resolve_endpoint(sim.env, uid=os.geteuid() + 1000)


@pytest.mark.anyio
@pytest.mark.parametrize("target, mode", [("dir", 0o750), ("dir", 0o707), ("socket", 0o660), ("socket", 0o606)])
async def test_group_or_world_bits_are_refused_before_connecting(target, mode):
    async with SimulatedOwner(codex_home=True) as sim:
        path = sim.socket_path.parent if target == "dir" else sim.socket_path
        os.chmod(path, mode)
        try:
            with pytest.raises(EndpointInsecure, match=f"has mode {mode:04o}"):
                await connect_thread(sim.thread_id, env=sim.env)
            assert sim.connections == 0
        finally:
            os.chmod(path, 0o700 if target == "dir" else 0o600)


@pytest.mark.anyio
async def test_a_symlinked_ipc_directory_is_refused():
    async with SimulatedOwner(codex_home=True) as sim:
        home = sim.codex_home / "other-home"
        home.mkdir(mode=0o700)
        (home / "ipc").symlink_to(sim.socket_path.parent)
        with pytest.raises(EndpointInsecure, match="is a symbolic link"):
            await connect_thread(sim.thread_id, env={"CODEX_HOME": str(home)})
        assert sim.connections == 0


@pytest.mark.anyio
async def test_a_symlinked_socket_is_refused():
    async with SimulatedOwner(codex_home=True) as sim:
        ipc = sim.codex_home / "other-home" / "ipc"
        ipc.mkdir(parents=True, mode=0o700)
        (ipc / "ipc.sock").symlink_to(sim.socket_path)
        with pytest.raises(EndpointInsecure, match="socket .* is a symbolic link"):
            await connect_thread(sim.thread_id, env={"CODEX_HOME": str(ipc.parent)})


@pytest.mark.anyio
async def test_a_peer_running_as_another_user_is_refused_after_connecting():
    async with SimulatedOwner(codex_home=True) as sim:
        with pytest.raises(PeerMismatch, match="runs as uid"):
            await connect_thread(sim.thread_id, env=sim.env, peer_uid_lookup=lambda sock: os.geteuid() + 1)
        assert sim.follow_count == 0  # refused before a single message was sent
