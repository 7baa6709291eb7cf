"""What the figures were measured on: cores, memory, CPU model, Java, Spark, Python, and the load at the start."""

from __future__ import annotations

import os
import platform
import subprocess


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory_gib() -> float:
    try:
        with open("/proc/meminfo") as info:
            for line in info:
                if line.startswith("MemTotal:"):
                    return round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return 0.0


def _java_version() -> str:
    try:
        out = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    lines = (out.stderr or out.stdout).splitlines()
    return lines[0].strip() if lines else "unknown"


def describe() -> dict:
    import pyspark

    return {
        "nproc": os.cpu_count(),
        "memory_gib": _memory_gib(),
        "cpu_model": _cpu_model(),
        "java": _java_version(),
        "spark": pyspark.__version__,
        "python": platform.python_version(),
        "kernel": platform.release(),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
    }
