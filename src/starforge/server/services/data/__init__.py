"""What a run reads: uploaded blobs, platform datasets, images and their registries, the hub
preflight."""
