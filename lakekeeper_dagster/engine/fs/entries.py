"""A directory listing brought to Python in a few py4j round trips, whatever the number of its entries.

`FileSystem.listStatus` returns `FileStatus` objects; reading each one's path, kind, length and modification time
through py4j costs a round trip per field and entry, ~6 a file, and listings are most of a run's round trips. Here
the whole array is serialized to JSON in the JVM by Jackson (in Spark's jars) from the objects' fields, in one call:
no getter runs, so nothing is loaded that the listing did not already return (the local filesystem's permission and
owner getters fork a process). The fields read are those `FileStatus` has kept since Hadoop 0.x (`path`, `length`,
`isdir`, `modification_time`); a listing whose JSON lacks one of them, or holds a path that is not a plain URI, is
read through the getters (`by_getters`), as before, and so is every listing of a filesystem whose first listing
the getters contradicted.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit


@dataclass(frozen=True)
class Entry:
    """One entry of a listing: `path` as Hadoop's `Path.toString()` prints it, `name` its last component."""

    name: str
    path: str
    is_directory: bool
    size: int
    modification_time: int


def path_string(uri: str) -> str | None:
    """What Hadoop's `Path.toString()` prints for a path whose URI is `uri` (scheme, authority, decoded path), or
    None for a URI with a query or fragment, which a listed path never has."""
    parts = urlsplit(uri)
    if parts.query or parts.fragment or "?" in uri or "#" in uri:
        return None
    scheme = f"{parts.scheme}:" if parts.scheme else ""
    authority = f"//{unquote(parts.netloc)}" if parts.netloc else ""
    return scheme + authority + unquote(parts.path)


class EntryReader:
    """Reads listings as JSON through a Jackson mapper that serializes objects by their fields (made on first use,
    a few round trips). The first listing of each filesystem is also read through the getters: when they disagree
    (a status class that keeps its figures elsewhere), that filesystem's listings are read through the getters."""

    def __init__(self, java: Any):
        self._java = java
        self._mapper: Any = None  # False once it could not be made: every listing through the getters
        self._trusted: dict[str, bool] = {}  # filesystem root -> whether its JSON matched the getters

    def read(self, statuses: Any, filesystem: str) -> list[Entry]:
        """The entries of a `FileStatus[]` listed from `filesystem` (its scheme and authority)."""
        entries = self.from_json(statuses) if self._trusted.get(filesystem, True) else None
        if entries is None:
            return by_getters(statuses)
        if filesystem not in self._trusted and entries:
            self._trusted[filesystem] = by_getters([statuses[0]]) == entries[:1]
            if not self._trusted[filesystem]:
                return by_getters(statuses)
        return entries

    def _make_mapper(self) -> Any:
        jackson = self._java.com.fasterxml.jackson
        mapper = jackson.databind.ObjectMapper()
        visibility, accessor = jackson.annotation.JsonAutoDetect.Visibility, jackson.annotation.PropertyAccessor
        mapper.setVisibility(accessor.ALL, visibility.NONE)
        mapper.setVisibility(accessor.FIELD, visibility.ANY)
        mapper.disable(jackson.databind.SerializationFeature.FAIL_ON_EMPTY_BEANS)
        return mapper

    def from_json(self, statuses: Any) -> list[Entry] | None:
        """The entries from the array's JSON, or None when its JSON does not hold what an entry needs."""
        if self._mapper is None:
            try:
                self._mapper = self._make_mapper()
            except Exception:  # no Jackson of this shape in this JVM: read through the getters
                self._mapper = False
        if self._mapper is False:
            return None
        try:
            document = json.loads(self._mapper.writeValueAsString(statuses))
        except Exception:  # a status class Jackson cannot serialize by its fields: read through the getters
            return None
        entries = []
        for status in document:
            try:
                uri, directory = status["path"]["uri"], status["isdir"]
                size, modified = status["length"], status["modification_time"]
            except (KeyError, TypeError):
                return None
            path = path_string(uri) if isinstance(uri, str) else None
            if path is None or not isinstance(directory, bool) or not isinstance(size, int):
                return None
            if not isinstance(modified, int):
                return None
            entries.append(Entry(path.rsplit("/", 1)[-1], path, directory, size, modified))
        return entries


def by_getters(statuses: Any) -> list[Entry]:
    """The entries of a `FileStatus[]` read field by field through py4j (~6 round trips an entry)."""
    entries = []
    for status in statuses:
        path = str(status.getPath().toString())
        entries.append(
            Entry(
                path.rsplit("/", 1)[-1],
                path,
                bool(status.isDirectory()),
                int(status.getLen()),
                int(status.getModificationTime()),
            )
        )
    return entries
