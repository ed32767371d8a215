-- POST /v1/sagas/order-payment with the same key and body every time: after the first request,
-- every answer is the stored response (Idempotent-Replayed: true).
wrk.method = "POST"
wrk.body = '{"orderId":"bench-replay","customerId":7,"amount":"49.90"}'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Idempotency-Key"] = "bench-replay"
