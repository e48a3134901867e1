"""Salesforce: the adapter (adapter.py).

Its local emulator, for tests and drills, is lab/emulators/salesforce.py.
"""
