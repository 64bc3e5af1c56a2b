GPUSERVE_API_KEY=<llm_api_key> \
sh -c 'exec python3 -m sglang.launch_server "$@" --api-key "$GPUSERVE_API_KEY"' sglang \
  --model-path /models/zai-org/GLM-4.6V-FP8 \
  --served-model-name glm-4.6v \
  --host 127.0.0.1 \
  --port 18020 \
  --enable-metrics \
  --tp-size 4 \
  --ep-size 4 \
  --max-running-requests 40 \
  --context-length 131072 \
  --kv-cache-dtype fp8_e4m3 \
  --mem-fraction-static 0.9215 \
  --tool-call-parser glm45 \
  --reasoning-parser glm45 \
  --grammar-backend xgrammar \
  --preferred-sampling-params '{"top_k": 20, "max_new_tokens": 32768}' \
  --enable-multimodal

# environment: GPUSERVE_API_KEY
