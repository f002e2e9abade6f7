"""Services: the control plane's decisions, each in one database transaction before it acts."""
