"""The union view's text in its three states. Pure Python.

`base`: the source's partitions and the merged table, unfiltered (between periods). While one period P is merged:
`pending` hides P from the merged side (before P's merged partition is registered: nothing changes for readers),
`switched` shows P from the merged side and hides exactly P's planned fine partitions (named by their values, so a
late or untimed partition of P still shows) from the source side. Each state is one `ALTER VIEW ... AS`, one
metastore call. Filters are `NOT coalesce(..., false)`: a row whose partition values are NULL stays visible.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from lakekeeper_dagster.engine.hive.model import quote_identifier, sql_string
from lakekeeper_dagster.engine.plan.merge import MergeLayout

VIEW_TEXT_LIMIT = 30_000  # the metastore keeps a view's text in a VARCHAR(32672) on Derby; keep a margin


def _equal(columns: Sequence[str], values: Sequence[str]) -> str:
    return " AND ".join(f"{quote_identifier(c)} = {sql_string(v)}" for c, v in zip(columns, values, strict=True))


@dataclass(frozen=True)
class UnionView:
    """The view over `source` and `merged` (both quoted SQL names) for `layout`."""

    source: str
    merged: str
    layout: MergeLayout

    def _source_select(self) -> str:
        return f"SELECT {', '.join(quote_identifier(c) for c in self.layout.view_columns)} FROM {self.source}"

    def _merged_select(self) -> str:
        kept = {source: merged for merged, source in self.layout.kept}
        columns = []
        for column in self.layout.view_columns:
            if self.layout.flat and column in kept:
                columns.append(f"{quote_identifier(kept[column])} AS {quote_identifier(column)}")
            else:
                columns.append(quote_identifier(column))
        return f"SELECT {', '.join(columns)} FROM {self.merged}"

    def _union(self, source_filter: str | None, merged_filter: str | None) -> str:
        source = self._source_select() + (f" WHERE NOT coalesce({source_filter}, false)" if source_filter else "")
        merged = self._merged_select() + (f" WHERE NOT coalesce({merged_filter}, false)" if merged_filter else "")
        return f"{source} UNION ALL {merged}"

    def base(self) -> str:
        return self._union(None, None)

    def _coarse(self, spec: dict[str, str]) -> str:
        return _equal([c for c, _ in self.layout.coarse], [spec[c] for c, _ in self.layout.coarse])

    def pending(self, spec: dict[str, str]) -> str:
        """The merged side without the period `spec` (a coarse spec)."""
        return self._union(None, self._coarse(spec))

    def switched(self, spec: dict[str, str], fine: Sequence[dict[str, str | None]]) -> str:
        """The source side without exactly the `fine` partitions (specs) of the period: their values compared as a
        tuple, so a partition with a NULL value or a value holding any character is told apart."""
        if self.layout.flat:
            column = self.layout.kept[0][1]
            values = ", ".join(sql_string(str(f[column])) for f in fine)
            return self._union(f"{quote_identifier(column)} IN ({values})", None)
        columns = [source for _, source in self.layout.kept]
        key = f"({', '.join(quote_identifier(c) for c in columns)})"
        values = ", ".join("(" + ", ".join(sql_string(str(f[c])) for c in columns) + ")" for f in fine)
        return self._union(f"{self._coarse(spec)} AND {key} IN ({values})", None)

    def fits(self, spec: dict[str, str], fine: Sequence[dict[str, str | None]]) -> bool:
        return len(self.switched(spec, fine)) <= VIEW_TEXT_LIMIT
