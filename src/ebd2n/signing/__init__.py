"""Signed campaign records: an Ed25519-signed, chained statement of everything a passing audit saw,
checkable on any copy of the campaign without torch or a GPU (`ebd2n verify`)."""
