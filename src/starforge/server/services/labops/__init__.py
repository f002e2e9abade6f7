"""Running the lab: the maintenance drain and webhook notifications with their address policy."""
