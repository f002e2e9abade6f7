"""The researcher's workspace (a "lab"): root, experiments, git provenance and the packer."""
