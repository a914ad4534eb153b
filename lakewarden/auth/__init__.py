"""Who may do what: grants (pure), API tokens and OIDC bearer tokens (who is calling), and
the audit trail (what they did)."""
