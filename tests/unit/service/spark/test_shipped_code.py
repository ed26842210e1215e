"""The zip of brewstream's code that the driver ships to the executors."""

import subprocess
import sys
import zipfile
from pathlib import Path

from service.spark.shipped_code import code_zip, package_sources, zip_bytes


def test_the_zip_holds_every_module_of_the_packages_and_only_sources(tmp_path: Path) -> None:
    path = code_zip(tmp_path)
    names = zipfile.ZipFile(path).namelist()
    assert all(n.endswith(".py") for n in names)
    for module in ("service/drink_count/aggregate.py", "service/windows/aggregate.py", "service/records/badrecords.py",
                   "service/records/limits.py", "topics/event_time.py", "restorer/__init__.py", "sandbox/jars.py"):
        assert module in names
    assert not any("__pycache__" in n for n in names)


def test_same_code_same_file_and_a_change_makes_another(tmp_path: Path) -> None:
    first = code_zip(tmp_path)
    assert code_zip(tmp_path) == first
    assert [p.name for p in tmp_path.iterdir()] == [first.name]  # nothing half-written left behind
    files = package_sources()
    changed = zip_bytes([*files[:-1], (files[-1][0], files[-1][1] + b"\n# changed\n")])
    assert changed != zip_bytes(files) == first.read_bytes()


def test_executor_code_imports_from_the_zip_alone(tmp_path: Path) -> None:
    """What an executor does: the batch modules load from the zip, not from a checkout."""
    path = code_zip(tmp_path)
    probe = ("import sys; sys.path.insert(0, sys.argv[1]); "
             "import service.drink_count.aggregate as a, service.windows.aggregate as w; "
             "assert a.__file__.startswith(sys.argv[1]) and w.__file__.startswith(sys.argv[1]), a.__file__")
    # -I: no PYTHONPATH, no current directory on the path.
    proc = subprocess.run([sys.executable, "-I", "-c", probe, str(path)], capture_output=True, text=True,
                          cwd=tmp_path, timeout=60)
    assert proc.returncode == 0, proc.stderr
