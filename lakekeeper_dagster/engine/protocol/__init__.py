"""The protocol every operation stands on: journal, lease, swap guards, swap, commit and recovery."""
