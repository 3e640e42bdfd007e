"""Diagnosis of a directory of logs after the fact (`orchestrator diagnose DIR`): the classifier's
verdict composed with the policy and a throwaway ledger of the earlier allocations the logs hold.
It sits above `diagnose` (which reads evidence and never imports the policy or the ledger) and
below the CLI."""
