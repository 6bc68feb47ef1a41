"""`vplane create`'s values files: one kept as written, several merged as Helm merges values, bad ones
refused in one line naming the file (nothing is sent to the platform then)."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
import yaml

from vplane.cli import create


def test_one_file_is_kept_as_written_and_several_merge_later_winning(tmp_path: Path) -> None:
    first, second = tmp_path / "a.yaml", tmp_path / "b.yaml"
    first.write_text(
        "# mine\ncontrolPlane:\n  statefulSet:\n    highAvailability: {replicas: 3}\nsync: {a: 1}\n"
    )
    second.write_text("controlPlane:\n  statefulSet:\n    highAvailability: {replicas: 1}\nsync: [x]\n")
    assert create.values_text((first,)) == first.read_text()
    assert yaml.safe_load(create.values_text((first, second))) == {
        "controlPlane": {"statefulSet": {"highAvailability": {"replicas": 1}}},
        "sync": ["x"],
    }
    assert create.values_text(()) == ""


@pytest.mark.parametrize(
    ("text", "message"),
    [("a: [unclosed\n", "not valid YAML"), ("- a\n- b\n", "a vcluster.yaml is a map of settings, not list")],
)
def test_a_bad_values_file_is_refused_naming_it(tmp_path: Path, text: str, message: str) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    with pytest.raises(click.ClickException, match=message) as found:
        create.values_text((bad,))
    assert str(bad) in found.value.message
