"""The CPU table `make test` ends with: the kernel's process accounting records, decoded and summed by command."""

from __future__ import annotations

import struct

from pko.testing import cpuacct


def _record(command: bytes, utime: int, stime: int, etime: float = 1.0, pid: int = 10, ppid: int = 1,
            version: int = 3) -> bytes:
    return struct.pack("=BBHIIIIIIf8H16s", 0, version, 0, 0, 0, 0, pid, ppid, 0, etime, utime, stime,
                       0, 0, 0, 0, 0, 0, command)


def test_comp_t_is_a_mantissa_with_a_base_8_exponent() -> None:
    assert cpuacct.comp_t(0) == 0
    assert cpuacct.comp_t(40) == 40
    assert cpuacct.comp_t(0x1FFF) == 8191
    assert cpuacct.comp_t((1 << 13) | 1000) == 8000  # exponent 1: times 8
    assert cpuacct.comp_t((2 << 13) | 3) == 192


def test_records_decode_the_kernels_v3_layout_and_skip_what_is_not_one() -> None:
    data = (_record(b"pulumi", 30, 10, etime=250.0, pid=42, ppid=7) + _record(b"old", 1, 1, version=2)
            + _record(b"kube-apiserver\0\0", (1 << 13) | 1500, 0) + b"\0" * 20)  # a partial record at the end
    found = list(cpuacct.records(data))
    assert [r.command for r in found] == ["pulumi", "kube-apiserver"]
    assert found[0] == cpuacct.Record("pulumi", 0.4, 2.5, 42, 7)
    assert found[1].cpu == 120.0


def test_the_table_ranks_commands_by_cpu_and_sums_the_rest() -> None:
    found = [cpuacct.Record("pulumi", 0.4, 1, 1, 1)] * 5 + [cpuacct.Record("etcd", 7.0, 9, 2, 1),
                                                            cpuacct.Record("git", 0.1, 1, 3, 1)]
    lines = cpuacct.table(cpuacct.by_command(found), wall=4.55, top=2)
    assert lines[1].split() == ["etcd", "7.0", "76.9%", "1", "7.00"]
    assert lines[2].split() == ["pulumi", "2.0", "22.0%", "5", "0.40"]
    assert lines[3].split()[:5] == ["(1", "others)", "0.1", "1.1%", "1"]
    assert lines[4].startswith("total")
    assert "(2.00 cores busy over 5 s)" in lines[4]
