LLAMA_API_KEY=<llm_api_key> \
llama-server \
  --model /models/tiny/tiny.gguf \
  --no-mmproj \
  --alias tiny \
  --host 127.0.0.1 \
  --port 18020 \
  --parallel 4 \
  --ctx-size 8192 \
  --cache-type-k bf16 \
  --cache-type-v bf16 \
  --threads 2 \
  --batch-size 512 \
  --jinja \
  --chat-template-kwargs '{"enable_thinking": false}' \
  --reasoning-budget 0 \
  --top-k 20 \
  --n-predict 1024 \
  --metrics \
  --slots

# environment: LLAMA_API_KEY
