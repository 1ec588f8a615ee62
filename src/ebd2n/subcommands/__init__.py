"""The subcommands of `ebd2n.cli`, by group: each group's arguments, --help and examples."""
