-- The W3C Trace Context of whoever started a saga (the HTTP request's traceparent and tracestate
-- headers, or Engine::StartSaga's TraceContext). Every command of the saga carries it as the
-- CloudEvents distributed-tracing extension, also commands written long after the start (a
-- compensation after a timeout, a resend), so it is kept with the saga. Nullable columns without a
-- default: adding them rewrites nothing.
ALTER TABLE saga_instance ADD COLUMN traceparent text NULL, ADD COLUMN tracestate text NULL;
