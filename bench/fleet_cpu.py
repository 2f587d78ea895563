"""A fleet measured as fleets run (issue 29, item 3): the seed's three fixes on 16 loopback sshd
hosts, the controller's CPU per host and the hosts' CPU per host apart, then the wall time with
25 ms of delay each way on the hosts' network, 1 host against 16.

On a real fleet each host runs its part on its own CPUs, so the controller's work per host is
what limits a rollout. Here every "host" is this machine, so each host's sshd is moved into a
cgroup v2 of its own before the first row: everything a connection to it starts (sshd's session,
the login shell, the agent's Python, the engine, its git and check scripts) is accounted to that
host, and the measured command (``patchkit``, ``ansible-playbook``, the loop's bash) runs in a
cgroup ``controller`` with all its children (Ansible's forks, the ssh clients). Rows, every
repetition, interleaved:

- ``patchkit apply FIXES --inventory INV --forks 16`` (preflight and one wave), and the same with
  ``--forks 1``: one host at a time, as the loop runs, so no host's CPU is taken while 15 other
  hosts' runs share the machine's cores with it;
- the sequential ``patchkit apply FIXES --target ssh://...`` loop, one host after the other;
- an ``ansible-playbook`` of one ``ansible.posix.patch`` task per changed file (bench/fleet.py's);
- for the controller's goal: an ``ansible-playbook`` of one ``ansible.builtin.ping`` task;
- to take the rollout apart: an ``ansible-playbook`` of the one ``patchkit.fleet.engine`` task of
  the preflight (``--check``), and of the same task applying, each alone (``patchkit plan``'s
  request), and ``ssh host true`` to each host in turn.

The delay rows, ``apply --inventory`` on 1 host and on 16, reach the same hosts through a TCP
proxy per host that holds every chunk 25 ms in each direction (:class:`DelayProxy`): this
machine's kernel has no netem qdisc (``tc qdisc add dev lo root netem`` in a network namespace
fails, "Specified qdisc kind is unknown"; of the qdiscs only pfifo and htb exist), so the
delay is made in user space. The six rows are interleaved in every repetition.

Run: ``python bench/fleet_cpu.py --workdir /tmp/pkfc [--venv VENV] [--ansible-venv VENV]
[--repeat 5] [--write-doc docs/performance.md]`` as root (cgroups). Without
``--venv`` the working tree is installed into a fresh virtualenv with its fleet extra.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import shlex
import shutil
import statistics
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from common import (NEUTRAL, REPO, Sample, Version, cli, fmt, install, machine, measure, say, with_cache,
                    write_section)
from fleet import (HOSTS, Hosts, ansible_venv, clean_env, close_masters, has_fleet, judge_fleet, judge_loop,
                   judge_posix, loop_script, make_reference, posix_playbook)
from ratios import _load, report
from seed import FIXES, Fork, make_fork

sys.path.insert(0, str(REPO))  # the repository's tests/
from tests.fixtures.fleet_hosts import ansible_env, running_fleet, write_inventory  # noqa: E402

SECTION = "## Fleet: CPU per host, and the wall time with network delay"
DELAY_MS = 25
GOAL_CONTROLLER = 1.0  # controller CPU per host <= one `ping` task's per host
GOAL_HOSTS = 1.2  # hosts' CPU per host <= 1.2x the ssh:// loop's
GOAL_DELAY = 1.5  # with the delay, 16 hosts in <= 1.5x one host's wall time
ROWS = ("fleet", "fleet1", "loop", "posix", "ping", "preflight", "wave", "session")  # then "delay1", "delay16"


def cgroup2_mount() -> Path:
    """Where the cgroup v2 hierarchy is mounted (``/sys/fs/cgroup`` or a hybrid's ``unified``)."""
    for line in Path("/proc/mounts").read_text().splitlines():
        fields = line.split()
        if fields[2] == "cgroup2":
            return Path(fields[1])
    raise SystemExit("no cgroup v2 hierarchy mounted: per-host CPU accounting needs one")


class Groups:
    """One cgroup per host and one for the controller, under a parent of this run's."""

    def __init__(self, names: list[str]) -> None:
        self.parent = cgroup2_mount() / f"patchkit-bench-{os.getpid()}"
        self.names = ["controller", *names]
        for name in self.names:
            (self.parent / name).mkdir(parents=True)

    def enter(self, name: str, pid: int) -> None:
        (self.parent / name / "cgroup.procs").write_text(f"{pid}\n")

    def wrap(self, argv: list[str]) -> list[str]:
        """``argv`` run in the controller's cgroup, with every child it starts."""
        procs = shlex.quote(str(self.parent / "controller" / "cgroup.procs"))
        return ["sh", "-c", f'echo $$ > {procs} && exec "$@"', "sh", *argv]

    def usage(self) -> dict[str, float]:
        """CPU seconds (user and system) each group has used, exited processes included."""
        out = {}
        for name in self.names:
            stat = (self.parent / name / "cpu.stat").read_text().split()
            out[name] = int(stat[stat.index("usage_usec") + 1]) / 1e6
        return out

    def remove(self) -> None:
        for name in self.names:  # empty once the stopped sshds' last children have exited
            for _ in range(300):  # up to a minute: a busy machine reaps slowly
                try:
                    (self.parent / name).rmdir()
                    break
                except OSError:
                    time.sleep(0.2)
            else:
                say(f"cannot remove the cgroup {self.parent / name}: it still holds processes")
        try:
            self.parent.rmdir()
        except OSError:
            pass


@dataclass(frozen=True)
class Measured:
    sample: Sample
    controller: float  # CPU seconds of the controller's cgroup
    hosts: float  # CPU seconds of every host's cgroup together
    ok: bool
    detail: str


def measured(hosts: Hosts, groups: Groups, fresh: list[str], argv: list[str], env: dict[str, str],
             judge) -> Measured:
    """One row: ``fresh`` hosts put back to pristine (untimed), then ``argv`` measured; the
    hosts' CPU is every host group's (a row's other hosts stay idle)."""
    hosts.fresh(fresh)
    before = groups.usage()
    sample = measure(groups.wrap(argv), NEUTRAL, env, ok=(0, 2, 4, 16))
    close_masters(env)  # Ansible's ControlPersist masters: a host's last session ends here
    after = groups.usage()
    ok, detail = judge(sample)
    spent = {n: after[n] - before[n] for n in groups.names}
    return Measured(sample, spent["controller"], sum(v for n, v in spent.items() if n != "controller"),
                    ok, detail)


class DelayProxy:
    """A TCP proxy in front of each host's sshd that holds every chunk DELAY_MS in each
    direction (bytes keep their order; chunks in flight overlap, as on a long link). The
    kernel here has no netem (``tc qdisc ... netem`` fails: "Specified qdisc kind is unknown"),
    so the delay is made in user space, in a thread of this process; the rows it serves measure
    wall time only."""

    def __init__(self, targets: list[int], delay_ms: int) -> None:
        import asyncio

        self.delay = delay_ms / 1000
        self.loop = asyncio.new_event_loop()
        self.ports: dict[int, int] = {}  # the sshd's port -> the proxy's
        self.writers: set = set()  # every connection's two ends, closed with it or by close()
        self.servers = [self.loop.run_until_complete(
            asyncio.start_server(functools.partial(self._serve, port), "127.0.0.1", 0))
            for port in targets]
        for port, server in zip(targets, self.servers):
            self.ports[port] = server.sockets[0].getsockname()[1]
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    async def _serve(self, port: int, reader, writer) -> None:
        import asyncio

        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", port)
        self.writers.update((writer, up_writer))
        try:
            await asyncio.gather(self._pump(reader, up_writer), self._pump(up_reader, writer))
        finally:  # both ends closed, so the host's sshd session ends with its client's
            for end in (writer, up_writer):
                end.close()
                self.writers.discard(end)

    async def _pump(self, reader, writer) -> None:
        import asyncio

        queue: asyncio.Queue = asyncio.Queue()

        async def send() -> None:
            while True:
                due, data = await queue.get()
                await asyncio.sleep(max(0.0, due - self.loop.time()))
                if not data:
                    break
                writer.write(data)
                await writer.drain()
            try:
                writer.write_eof()
            except OSError:
                pass

        sender = asyncio.ensure_future(send())
        while True:
            try:
                data = await reader.read(65536)
            except OSError:
                data = b""
            queue.put_nowait((self.loop.time() + self.delay, data))
            if not data:
                break
        await sender

    def close(self) -> None:
        import asyncio

        async def shutdown() -> None:
            for server in self.servers:
                server.close()
            for end in list(self.writers):  # a connection still open: its sshd session ends
                end.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        asyncio.run_coroutine_threadsafe(shutdown(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def connect_rtt_ms(port: int) -> float:
    """The least of 5 ssh banner reads through ``port``: one round trip to the host's sshd
    (the proxy connects on to it when the client connects)."""
    import socket

    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.recv(64)
            best = min(best, time.perf_counter() - start)
    return best * 1000


def delayed_inventory(hosts: Hosts, proxy: DelayProxy, path: Path, names: list[str]) -> Path:
    """An inventory of ``names`` that reaches each host through the proxy; its known_hosts
    gains the host key under the proxy's port."""
    entries = []
    for name in names:
        host = hosts.host(name)
        port = proxy.ports[host.port]
        known = host.known_hosts.read_text().splitlines()[0].split(None, 1)[1]
        with host.known_hosts.open("a") as f:
            f.write(f"[127.0.0.1]:{port} {known}\n")
        entries.append(dataclasses.replace(host, port=port))
    host_vars = {}
    for name in names:
        copy = hosts.copy(name)
        host_vars[name] = {"patchkit_target": str(copy.sglang), "patchkit_roots": {"serve": str(copy.serve)}}
    return write_inventory(path, entries, host_vars, python=hosts.python)


def run_rows(after: Version, fork: Fork, workdir: Path, repeat: int, ansible_bin: Path, python: str,
             only: tuple[str, ...] = ()) -> dict:
    """Every row, interleaved: the CPU rows straight to the hosts, the delay rows through the
    proxy. Returns every run's figures."""
    with running_fleet(workdir / "sshd", HOSTS) as fleet:
        hosts = Hosts(fleet, fork, workdir, python)
        names = hosts.names
        groups = Groups(names)
        proxy = DelayProxy([hosts.host(n).port for n in names], DELAY_MS)
        try:
            for name in names:
                groups.enter(name, fleet.server(name).pid)
            inv = hosts.inventory(workdir / "inventory-16.yml", names)
            delayed = (delayed_inventory(hosts, proxy, workdir / "inventory-delay-1.yml", names[:1]),
                       delayed_inventory(hosts, proxy, workdir / "inventory-delay-16.yml", names))
            env = ansible_env(workdir, control_persist=60)
            rows = _rows(after, hosts, workdir, inv, delayed, env, ansible_bin)
            rows = {row: rows[row] for row in rows if not only or row in only}
            first = hosts.host(names[0]).port
            rtt = {"0": connect_rtt_ms(first), str(DELAY_MS): connect_rtt_ms(proxy.ports[first])}
            runs: dict[str, list[dict]] = {row: [] for row in rows}
            loads = []
            for i in range(repeat):
                for row in (list(rows) if i % 2 == 0 else list(rows)[::-1]):  # neither end always first
                    argv, row_env, judge, fresh = rows[row]
                    m = measured(hosts, groups, fresh, argv, row_env, judge)
                    runs[row].append({**vars(m), "sample": {**vars(m.sample), "stdout": ""}})
                    say(f"#{i + 1} {row}: wall {fmt(m.sample.seconds)}, controller {fmt(m.controller)}, "
                        f"hosts {fmt(m.hosts)}" + ("" if m.ok else f" NOT OK: {m.detail}"))
                loads.append(_load())
        finally:
            proxy.close()
    groups.remove()
    return {"runs": runs, "loads": loads, "rtt": rtt}


def _rows(after: Version, hosts: Hosts, workdir: Path, inv: Path, delayed: tuple[Path, Path],
          env: dict[str, str], ansible_bin: Path) -> dict:
    """Each row's command, environment, judge and the hosts it needs pristine."""
    names = hosts.names
    ref = make_reference(after, hosts, workdir)
    playbook = posix_playbook(workdir / "posix-patch.json", ref)
    ping = workdir / "ping.json"
    ping.write_text(json.dumps([{"hosts": "all", "gather_facts": False,
                                 "tasks": [{"ansible.builtin.ping": {}}]}]))
    out = workdir / "loop-out"
    out.mkdir(exist_ok=True)
    script = workdir / "loop.sh"
    script.write_text(loop_script(after, hosts, names, out))
    sessions = workdir / "sessions.sh"
    sessions.write_text("".join(
        shlex.join(["ssh", *hosts.host(n).server.ssh_options(), "-o", "ControlMaster=no", "-p",  # type: ignore[union-attr]
                    str(hosts.host(n).port), f"{hosts.host(n).user}@127.0.0.1", "true"]) + "\n"
        for n in names))
    def rollout(forks: int) -> list[str]:
        return [*clean_env(env), after.patchkit, "apply", *FIXES, "--forks", str(forks), "--json", "--inventory"]

    fleet = rollout(HOSTS)
    fleet_env = {**after.env, **env}
    plan = workdir / "plan.json"  # the request the rollout's engine tasks run, rendered once
    plan.write_text(cli(after, "plan", *FIXES, "--json"))
    engine = workdir / "engine.json"
    engine.write_text(json.dumps([{"hosts": "all", "gather_facts": False,
                                   "tasks": [{"patchkit.fleet.engine": {"plan": str(plan)}}]}]))
    collection = cli(after, "plan", "--collections-path").strip()
    engine_env = {**env, "ANSIBLE_COLLECTIONS_PATH": ":".join(
        p for p in (collection, env.get("ANSIBLE_COLLECTIONS_PATH")) if p)}
    engine_argv = [*clean_env(engine_env), str(after.venv / "bin" / "ansible-playbook"), "-i", str(inv),
                   "--forks", str(HOSTS), str(engine)]
    return {
        "fleet": ([*fleet, str(inv)], fleet_env, judge_fleet(names), names),
        "fleet1": ([*rollout(1), str(inv)], fleet_env, judge_fleet(names), names),
        "loop": (["bash", str(script)], after.env, judge_loop(out, names), names),
        "posix": ([*clean_env(env), str(ansible_bin / "ansible-playbook"), "-i", str(inv),
                   "--forks", str(HOSTS), str(playbook)], env, judge_posix, names),
        "ping": ([*clean_env(env), str(after.venv / "bin" / "ansible-playbook"), "-i", str(inv),
                  "--forks", str(HOSTS), str(ping)], env, judge_posix, []),
        "preflight": ([*engine_argv, "--check"], engine_env, judge_posix, names),
        "wave": (engine_argv, engine_env, judge_posix, names),
        "session": (["bash", "-e", str(sessions)], {}, lambda sample: (True, ""), []),
        "delay1": ([*fleet, str(delayed[0])], fleet_env, judge_fleet(names[:1]), names[:1]),
        "delay16": ([*fleet, str(delayed[1])], fleet_env, judge_fleet(names), names),
    }


# -- the report ------------------------------------------------------------------------------


def per_host(values: list[Measured], what: str) -> list[Sample]:
    """The runs of a row as samples of CPU seconds per host (``controller`` or ``hosts``)."""
    return [Sample(getattr(m, what) / HOSTS, m.sample.rss_kb) for m in values]


def render(figures: dict, repeat: int, source: str, posix: str) -> str:
    runs = {row: [Measured(Sample(**r["sample"]), r["controller"], r["hosts"], r["ok"], r["detail"])
                  for r in rs] for row, rs in figures["runs"].items()}
    loads, rtt = figures["loads"], figures["rtt"]
    if not {"fleet", "loop", "ping", "delay1", "delay16"} <= set(runs):  # a run of chosen rows
        return "\n".join([SECTION, "", f"Chosen rows only, N = {repeat}; load average after each "
                          "repetition: " + ", ".join(loads) + ".", "", *_cpu_table(runs, posix), ""])
    one, sixteen = runs["delay1"], runs["delay16"]
    w1 = statistics.median(m.sample.seconds for m in one)
    w16 = statistics.median(m.sample.seconds for m in sixteen)
    bad = [m.detail for m in one + sixteen if not m.ok]
    return "\n".join([
        SECTION, "",
        f"From `python bench/fleet_cpu.py --repeat {repeat}` ({source}); {machine()} Load average "
        "(1, 5, 15 min) after each repetition: " + ", ".join(loads) + ".", "",
        "CPU per host: each row's CPU seconds (user and system) divided by the 16 hosts. The "
        "controller's is the cgroup v2 the measured command ran in, with every child it started "
        "(Ansible's forks, the ssh clients, the loop's `patchkit` processes); the hosts' is the sum "
        "of the 16 hosts' cgroups, each holding that host's sshd and everything its connections ran "
        "(sshd's sessions, the login shell, the agent's Python, the engine, git, the check scripts). "
        f"The delay rows reach the hosts through a TCP proxy per host that holds every chunk {DELAY_MS} "
        "ms in each direction, in user space: this machine's kernel has no netem qdisc (`tc qdisc "
        "add ... netem` in a network namespace fails, \"Specified qdisc kind is unknown\"). The "
        f"first ssh banner took {rtt['0']:.1f} ms straight and {rtt[str(DELAY_MS)]:.0f} ms through "
        f"the proxy (connect, then the banner). N = {repeat}, all {len(runs)} rows interleaved (the order "
        "reversed every other repetition), every host a row uses put back to its pristine copy "
        "before it (untimed).", "",
        *_cpu_table(runs, posix), "",
        f"With {DELAY_MS} ms each way, `apply --inventory` on 1 host: median {fmt(w1)} (min "
        f"{fmt(min(m.sample.seconds for m in one))}); on 16 hosts: {fmt(w16)} (min "
        f"{fmt(min(m.sample.seconds for m in sixteen))})" + (f"; NOT OK: {bad[0]}" if bad else "") + ".", "",
        "The goals as ratios (ratio of the medians, and of the minimums):", "",
        *_ratios(runs, repeat, loads), "", _projection(runs, w1), ""])


def _cpu_table(runs: dict[str, list[Measured]], posix: str) -> list[str]:
    labels = {"fleet": f"`patchkit apply --inventory` (preflight and one wave), `--forks {HOSTS}`",
              "fleet1": "the same with `--forks 1`: one host at a time, as the loop (no host's run shares the 2 cores with another's)",
              "loop": "sequential `patchkit apply --target ssh://...` loop",
              "posix": f"`ansible-playbook` of the `ansible.posix.patch` tasks, `--forks {HOSTS}` ({posix})",
              "ping": f"`ansible-playbook` of one `ansible.builtin.ping` task, `--forks {HOSTS}`",
              "preflight": "the preflight's `patchkit.fleet.engine` task alone (`--check`), `--forks 16`",
              "wave": "the same task applying, alone, `--forks 16`",
              "session": "for scale: `ssh host true` to each host in turn (a new connection and login)",
              "delay1": f"`apply --inventory`, 1 host, {DELAY_MS} ms each way (per host: that one)",
              "delay16": f"`apply --inventory`, 16 hosts, {DELAY_MS} ms each way"}
    table = ["| row | wall, median (min) | controller CPU per host, median (min) | "
             "hosts' CPU per host, median (min) | every host done |", "|---|---|---|---|---|"]
    for row, label in labels.items():
        if row not in runs:
            continue
        rs, per = runs[row], (1 if row == "delay1" else HOSTS)
        walls = [m.sample.seconds for m in rs]
        cell = {w: f"{fmt(statistics.median(getattr(m, w) for m in rs) / per)} "
                   f"({fmt(min(getattr(m, w) for m in rs) / per)})" for w in ("controller", "hosts")}
        done = "yes, every run" if all(m.ok for m in rs) else f"NO: {next(m.detail for m in rs if not m.ok)}"
        table.append(f"| {label} | {fmt(statistics.median(walls))} ({fmt(min(walls))}) | "
                     f"{cell['controller']} | {cell['hosts']} | {done} |")
    return table


def _ratios(runs: dict[str, list[Measured]], repeat: int, loads: list[str]) -> list[str]:
    """The three goals as ratios, in bench/ratios.py's table (without its RSS column)."""
    pairs = [("controller CPU per host: `apply --inventory` / one `ping` task", None, None, GOAL_CONTROLLER),
             ("hosts' CPU per host: `apply --inventory` / the `ssh://` loop", None, None, GOAL_HOSTS),
             (f"wall time, {DELAY_MS} ms each way: `apply --inventory` on 16 hosts / on 1 host",
              None, None, GOAL_DELAY)]
    out = {pairs[0][0]: (per_host(runs["fleet"], "controller"), per_host(runs["ping"], "controller")),
           pairs[1][0]: (per_host(runs["fleet"], "hosts"), per_host(runs["loop"], "hosts")),
           pairs[2][0]: ([m.sample for m in runs["delay16"]], [m.sample for m in runs["delay1"]])}
    table = [line.rsplit(" | ", 1)[0] + " |"
             for line in report(out, pairs, repeat, loads).split("\n") if line.startswith("| ")]
    table.insert(1, "|---|---|---|---|---|")
    return table


def _projection(runs: dict[str, list[Measured]], w1: float) -> str:
    """256 hosts with ``--forks 32`` from the 1- and 16-host delay rows: the controller's fixed
    CPU and its CPU per further host; the hosts' rounds."""
    c1 = statistics.median(m.controller for m in runs["delay1"])
    c16 = statistics.median(m.controller for m in runs["delay16"])
    per = (c16 - c1) / (HOSTS - 1)
    fixed = c1 - per
    total = fixed + 256 * per
    rounds = 256 // 32
    return (f"**256 hosts with `--forks 32`, projected from these figures.** The controller's "
            f"CPU is {fmt(fixed)} whatever the fleet's size (patchkit, `ansible-inventory`, two "
            f"`ansible-playbook` start-ups) plus {fmt(per)} per host (from the 1- and 16-host delay "
            f"rows: {fmt(c1)} and {fmt(c16)}), so 256 hosts take {fmt(total)} of controller CPU: "
            f"{fmt(total / 2)} on a 2-core controller, {fmt(total / 8)} on 8 cores. Each host runs "
            f"its part on its own CPUs: with 32 forks the 256 hosts go in {rounds} rounds per "
            f"playbook, each round at most one host's delayed run ({fmt(w1)}, start-ups included), so "
            f"at most {fmt(rounds * w1)}. A rollout takes about the larger of the two: "
            + ("the hosts' rounds, on a 2-core controller as on a larger one."
               if rounds * w1 >= total / 2 else
               f"the controller's CPU on 2 cores, the hosts' rounds from {total / (rounds * w1):.1f} cores on."))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", type=Path, required=True, help="a short path (ssh control sockets)")
    parser.add_argument("--venv", type=Path, help="a virtualenv with patchkit[fleet]; default: install the working tree")
    parser.add_argument("--ansible-venv", type=Path, help="a virtualenv with the `ansible` package (ansible.posix)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--write-doc", type=Path)
    parser.add_argument("--quick", action="store_true", help="one repetition: a check that it runs")
    parser.add_argument("--row", action="append", default=[], choices=[*ROWS, "delay1", "delay16"],
                        help="measure only this row (repeatable); the goals need them all")
    parser.add_argument("--render", type=Path, help="write the section from a run's figures.json only")
    args = parser.parse_args()
    args.workdir = args.workdir.resolve()
    if args.render:
        saved = json.loads(args.render.read_text())
        section = render(saved["figures"], saved["repeat"], saved["source"], saved["posix"])
        print(section)
        if args.write_doc:
            write_section(args.write_doc, section)
        return
    repeat = 1 if args.quick else max(args.repeat, 5)  # the N >= 5
    args.workdir.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(args.workdir / "rows", ignore_errors=True)
    if args.venv:
        after = with_cache(Version("after", "the given virtualenv", args.venv.resolve(), {}), "cache")
        source = f"patchkit from the virtualenv {args.venv.name}"
    else:
        after = install("after", None, args.workdir, extras="fleet")
        source = f"patchkit from {after.source}, installed with its fleet extra"
    if not has_fleet(after):
        raise SystemExit("that patchkit has no fleet (no ansible-playbook beside it)")
    ansible_bin, posix = ansible_venv(args.ansible_venv or args.workdir / "venv-ansible")
    python = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
    shutil.rmtree(args.workdir / "fork", ignore_errors=True)
    fork = make_fork(after, args.workdir / "fork")
    figures = run_rows(after, fork, args.workdir / "rows", repeat, ansible_bin, python, tuple(args.row))
    (args.workdir / "figures.json").write_text(json.dumps(
        {"figures": figures, "repeat": repeat, "source": source, "posix": posix}))
    section = render(figures, repeat, source, posix)
    print(section)
    if args.write_doc:
        write_section(args.write_doc, section)


if __name__ == "__main__":
    main()
