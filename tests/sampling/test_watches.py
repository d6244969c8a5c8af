"""Who watches which devices: owners overlap and nest; the last one leaving ends the watch."""

from warptd.sampling.watches import Watches


def test_overlapping_owners():
    watches = Watches()
    assert watches.add("a", {("nvidia", 0)}, set()) == {"nvidia"}
    assert watches.add("b", {("nvidia", 0), ("nvidia", 1)}, {"rapl"}) == {"nvidia", "rapl"}
    assert watches.devices("nvidia") == {0, 1} and watches.watched("rapl")
    assert watches.remove("b") == {"nvidia", "rapl"}
    assert watches.devices("nvidia") == {0} and not watches.watched("rapl")
    assert watches.remove("a") == {"nvidia"} and not watches.watched("nvidia")
    assert watches.remove("a") == set()  # twice: nothing


def test_a_new_watch_of_an_owner_replaces_its_old_one():
    watches = Watches()
    watches.add("a", {("nvidia", 0)}, set())
    assert watches.add("a", {("amd", 2)}, set()) == {"nvidia", "amd"}
    assert watches.devices("nvidia") == set() and watches.devices("amd") == {2}
