"""The lab: what imitates the world for drills, tests and benchmarks.

The sandbox destination (`lab.sandbox`), the vendors' local emulators
(`lab.emulators`), the failure drill (`lab.drill`) and the benchmarks
(`lab.bench`). Nothing on the production path imports this package (an
import-linter contract in pyproject.toml); its management commands (`sandbox`,
`emulator`, `drill`, `bench_*`) are how people and `make` reach it.
"""
