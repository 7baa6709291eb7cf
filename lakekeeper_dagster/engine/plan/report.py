"""What people read: the dry-run report of plans and the one-line outcome of each unit."""

from __future__ import annotations

from lakekeeper_dagster.engine.plan.thresholds import human_bytes
from lakekeeper_dagster.engine.plan.units import TablePlan
from lakekeeper_dagster.engine.statuses import PlanStatus


def render_report(plans: list[TablePlan]) -> str:
    """The human dry-run report: per table and partition, status, files, size, average, threshold, target (files
    written + large files kept), and the small files (rewritten) and large ones (left as they are)."""
    lines: list[str] = []
    for plan in plans:
        lines.append(f"Table: {plan.qualified_name}")
        if plan.status == PlanStatus.SKIPPED:
            lines.append(f"  Status   : SKIPPED: {plan.reason}")
            lines.append("")
            continue
        lines.append(f"  Status   : {plan.status}")
        lines.append(f"  Format   : {plan.file_format}")
        lines.append(f"  Files    : {plan.file_count}")
        lines.append(f"  Size     : {human_bytes(plan.total_bytes)}")
        for unit in plan.partitions:
            label = unit.partition or "(whole table)"
            lines.append(
                f"    {label:<40} {unit.status:<17} files={unit.file_count:<6} size={human_bytes(unit.total_bytes):<9}"
                f" avg={human_bytes(unit.average_bytes):<9} threshold={human_bytes(unit.threshold_bytes):<9}"
                f" target={unit.target_files} small={unit.small_files} ({human_bytes(unit.small_bytes)})"
                f" large_kept={unit.large_files}"
            )
            if unit.status == PlanStatus.SUSPENDED:
                lines.append(f"      {unit.reason}")
        lines.append("")
    return "\n".join(lines)
