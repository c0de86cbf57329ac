"""A client with no retries and no fallback: one call per question."""
import anthropic

client = anthropic.Anthropic(max_retries=0)
for i in range(8):
    try:
        client.messages.create(model="claude-sonnet-4-5", max_tokens=200,
                               messages=[{"role": "user", "content": f"question {i}"}])
    except anthropic.APIError as e:
        print("failed:", type(e).__name__)
