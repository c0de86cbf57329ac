"""The SDK's retries (two, backing off, honouring retry-after), then a
fallback to a second model."""
import anthropic

client = anthropic.Anthropic(max_retries=2)
for i in range(8):
    for model in ("claude-sonnet-4-5", "claude-haiku-4-5"):
        try:
            client.messages.create(model=model, max_tokens=200,
                                   messages=[{"role": "user", "content": f"question {i}"}])
            break
        except anthropic.APIError as e:
            print("failed on", model, type(e).__name__)
