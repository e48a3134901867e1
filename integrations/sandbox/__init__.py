"""The sandbox destination's adapter (adapter.py): the quick start's CRM over HTTP.

The sandbox server itself (its CRM API, mail sink and controls) is a stand-in
for the world and lives in lab/sandbox/.
"""
