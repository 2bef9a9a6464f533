"""Which cluster a log dir's data belongs to: `meta.properties`, as Kafka keeps it in each log dir.

A broker deletes a replica it finds on disk when the metadata says it no longer hosts it (a stray),
so the metadata must be the cluster's own: metadata of another cluster (the controller's state
lost or replaced, another cluster's controller reached) names none of this data and would set it
all aside. The first image a broker applies writes the cluster id into every log dir that has none;
an image of another cluster id is refused before anything is touched, as Kafka refuses to start
("Invalid cluster.id").
"""
from __future__ import annotations

from pathlib import Path

from kshim.errors import StartRefused
from kshim.log.files import write_atomic

META_PROPERTIES = "meta.properties"


class ForeignMetadata(StartRefused):
    """The metadata is of another cluster than the data in a log dir: the broker must not apply it."""


def read_properties(log_dir: Path) -> dict[str, str]:
    """The file's key=value lines ({} when it is missing or unreadable)."""
    try:
        text = (log_dir / META_PROPERTIES).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return {}
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith("#"))


def check_cluster(log_dirs: list[Path], cluster_id: str, node_id: int) -> None:
    """Raise ForeignMetadata when a log dir belongs to another cluster than `cluster_id`; write the
    file into those that have none (synced: it is what protects the data from now on)."""
    for d in log_dirs:
        recorded = read_properties(d).get("cluster.id")
        if recorded is not None and recorded != cluster_id:
            raise ForeignMetadata(
                f"log dir {d} holds data of cluster {recorded}, but the metadata is of cluster {cluster_id} "
                f"(the controller's state was lost or replaced?): refusing it rather than deleting that data; "
                f"restore the metadata, or move the partition directories and {META_PROPERTIES} away")
    for d in log_dirs:
        if not read_properties(d):
            write_atomic(d / META_PROPERTIES, f"version=1\ncluster.id={cluster_id}\nnode.id={node_id}\n", fsync=True)
