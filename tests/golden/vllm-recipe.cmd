VLLM_API_KEY=<llm_api_key> \
vllm serve /models/zai-org/GLM-4.6V-FP8 \
  --served-model-name glm-4.6v \
  --host 127.0.0.1 \
  --port 18020 \
  --tensor-parallel-size 4 \
  --enable-expert-parallel \
  --max-num-seqs 40 \
  --compilation-config '{"max_cudagraph_capture_size": 512}' \
  --max-model-len 131072 \
  --kv-cache-dtype fp8 \
  --gpu-memory-utilization 0.9215 \
  --kv-cache-memory-bytes 64424509440 \
  --enable-prefix-caching \
  --enable-auto-tool-choice \
  --tool-call-parser glm45 \
  --reasoning-parser glm45 \
  --structured-outputs-config '{"backend": "xgrammar"}' \
  --default-chat-template-kwargs '{"enable_thinking": false}' \
  --override-generation-config '{"top_k": 20, "max_new_tokens": 32768}' \
  --limit-mm-per-prompt '{"image": 4, "video": 1}' \
  --allowed-media-domains data-urls-only/

# environment: VLLM_API_KEY
