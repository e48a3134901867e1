"""Tests of the lab: its drill, bench commands, emulators and sandbox."""
