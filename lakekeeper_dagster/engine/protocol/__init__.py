"""The protocol every operation stands on: journal, lease, pre-swap checks, swap, commit and recovery."""
