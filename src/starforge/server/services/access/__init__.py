"""Who may do what and with which secrets: users, tokens, secrets and their key ring, tenant
isolation."""
