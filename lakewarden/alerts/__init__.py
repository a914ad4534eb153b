"""Alerting: rules that watch the control plane's own tables, an alert store that
deduplicates and resolves, and sinks (webhook, Slack, Alertmanager) delivered with retries."""
