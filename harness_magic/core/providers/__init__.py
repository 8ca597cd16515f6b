"""The provider seam: rendering harness state into a provider's payload, calling it through litellm or an offline model, normalising the reply."""
