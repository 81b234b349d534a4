# SPDX-License-Identifier: Apache-2.0
"""The pure parts of sdk/python/bench/density_bench.py (`dsec-vmm bench
density`): step lists, the exec sample, percentiles, /proc parsing, where a
daemon's memory cgroup is, the sandboxes' cgroups and KSM's switch, over
fake files. No daemon."""

import os
import sys

import pytest

SDK = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(SDK, "bench"))

import density_bench as db  # noqa: E402


def test_default_steps_are_capped_at_max():
    assert db.parse_steps("", 1000) == [10, 100, 1000]
    assert db.parse_steps("", 300) == [10, 100, 300]
    assert db.parse_steps("", 5) == [5]
    assert db.parse_steps("", 20000) == [10, 100, 1000, 10000, 20000]


def test_given_steps_are_sorted_distinct_and_capped():
    assert db.parse_steps("200,50,50", 1000) == [50, 200]
    assert db.parse_steps("50,2000", 300) == [50, 300]


@pytest.mark.parametrize("text", ["10,x", "0,10", "-5", "10,,20"])
def test_bad_steps_are_refused(text):
    with pytest.raises(ValueError):
        db.parse_steps(text, 100)


def test_sample_takes_oldest_newest_and_evenly_between():
    assert db.sample_indices(5, 20) == [0, 1, 2, 3, 4]
    assert db.sample_indices(100, 5) == [0, 25, 50, 74, 99]
    picked = db.sample_indices(1000, 20)
    assert len(picked) == 20 and picked[0] == 0 and picked[-1] == 999
    gaps = [b - a for a, b in zip(picked, picked[1:])]
    assert max(gaps) - min(gaps) <= 1
    assert db.sample_indices(10, 1) == [9]


def test_percentile_is_nearest_rank_and_none_without_samples():
    values = list(range(1, 101))  # 1..100
    assert db.pct(values, 50) == 50
    assert db.pct(values, 99) == 99
    assert db.pct([3.0, 1.0, 2.0], 50) == 2.0
    assert db.pct([], 50) is None


def test_meminfo_parsing():
    m = db.parse_meminfo("MemTotal:       24684000 kB\nSUnreclaim:   123 kB\n"
                         "HugePages_Total:       0\n")
    assert m == {"MemTotal": 24684000, "SUnreclaim": 123, "HugePages_Total": 0}


MOUNTINFO_V1 = """\
30 25 0:26 / /sys/fs/cgroup rw - tmpfs tmpfs rw,mode=755
34 30 0:30 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
35 30 0:31 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
40 30 0:36 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""


def test_memory_cgroup_on_v1_hierarchy():
    cg = "4:memory:/process_api/abc\n1:cpu:/\n0::/\n"
    assert db.memory_cgroup_dir(cg, MOUNTINFO_V1) == (
        "/sys/fs/cgroup/memory/process_api/abc", "memory.usage_in_bytes")


def test_memory_cgroup_below_a_mount_of_a_subtree():
    mi = "34 30 0:30 /outer /mnt/my\\040cg rw - cgroup cgroup rw,memory\n"
    assert db.memory_cgroup_dir("4:memory:/outer/inner\n", mi) == (
        "/mnt/my cg/inner", "memory.usage_in_bytes")


def test_memory_cgroup_on_v2():
    mi = "40 30 0:36 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n"
    assert db.memory_cgroup_dir("0::/system.slice/d.service\n", mi) == (
        "/sys/fs/cgroup/system.slice/d.service", "memory.current")


def test_no_memory_cgroup_says_why():
    base, why = db.memory_cgroup_dir("1:cpu:/\n", MOUNTINFO_V1)
    assert base is None and "no memory" in why
    base, why = db.memory_cgroup_dir("4:memory:/x\n", "35 30 0:31 / /c rw - cgroup cgroup rw,cpu\n")
    assert base is None and "not mounted" in why


def _cgroup(d, usage, file="memory.usage_in_bytes"):
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, file), "w") as f:
        f.write("%d\n" % usage)


def test_container_memcg_by_name_and_by_state_record(tmp_path):
    base, state = str(tmp_path / "memory" / "daemon"), str(tmp_path / "state")
    _cgroup(os.path.join(base, "dsec-ctr-sb-1"), 100 * 1024)
    slot = os.path.join(base, "dsec-ctr-slot-7-3")  # a made-ahead init's cgroup
    _cgroup(slot, 300 * 1024)
    os.makedirs(os.path.join(state, "sb-2"))
    with open(os.path.join(state, "sb-2", "cgroups"), "w") as f:
        f.write("/sys/fs/cgroup/cpu/x/dsec-ctr-slot-7-3\n%s\n" % slot)
    m = db.Memcg("container", 7, state, base, "memory.usage_in_bytes")
    got = m.measure(["sb-1", "sb-2", "sb-3"])
    assert got["kib_per_sandbox"] == 200.0 and got["found"] == 2
    assert "2 of 3" in got["how"] and "1 from the state" in got["how"]


def test_memcg_unavailable_is_none_with_the_reason(tmp_path):
    m = db.Memcg("microvm", 7, None, str(tmp_path), "memory.usage_in_bytes")
    got = m.measure(["sb-1"])
    assert got["kib_per_sandbox"] is None and "dsec-ctr-mvm-<id>" in got["why"]
    m = db.Memcg("container", 7, None, None, "the daemon is in no memory cgroup")
    got = m.measure(["sb-1"])
    assert got == {"kib_per_sandbox": None, "why": "the daemon is in no memory cgroup"}


def test_fncall_memcg_sums_the_daemons_pool_workers(tmp_path):
    base = str(tmp_path)
    _cgroup(os.path.join(base, "dsec-ctr-d7-0abc-w1"), 4096 * 1024, "memory.current")
    _cgroup(os.path.join(base, "dsec-ctr-d7-0abc-w2"), 4096 * 1024, "memory.current")
    # Another daemon's worker.
    _cgroup(os.path.join(base, "dsec-ctr-d8-0abc-w1"), 9999 * 1024, "memory.current")
    got = db.Memcg("fncall", 7, None, base, "memory.current").measure(["a", "b", "c", "d"])
    assert got["kib_per_sandbox"] == 2048.0 and got["found"] == 2


def test_ksm_switch_is_restored_and_absent_is_seen(tmp_path):
    with open(tmp_path / "run", "w") as f:
        f.write("0\n")
    with open(tmp_path / "pages_sharing", "w") as f:
        f.write("3\n")
    k = db.Ksm(str(tmp_path))
    assert k.saved == "0"
    k.set(True)
    assert open(tmp_path / "run").read() == "1"
    assert k.sharing_kib() == 3 * os.sysconf("SC_PAGE_SIZE") // 1024
    k.restore()
    assert open(tmp_path / "run").read() == "0"
    assert db.Ksm(str(tmp_path / "none")).saved is None
