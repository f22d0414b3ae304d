-- jobkit 0004: the enqueuer's OpenTelemetry trace context travels with the job. jobs.trace_context
-- holds the W3C carrier ({"traceparent": ..., "tracestate": ...}) the enqueuer's propagator wrote, or
-- null (tracing not configured, or a job enqueued from SQL without one); claim_jobs returns it, so
-- the worker's spans continue the enqueuer's trace. Adding a nullable column without a default
-- rewrites nothing.
--
-- enqueue, enqueue_many and enqueue_json gain a last parameter p_trace_context jsonb default null:
-- every existing call (positional or named) means what it meant. A defaulted parameter is a new
-- signature, so the old functions are dropped and created again (a second overload would make the
-- old calls ambiguous), and claim_jobs is dropped and created again for its new result column.
-- Nothing in the database depends on them (plpgsql and sql bodies are not tracked); the grants a
-- user gave on them to roles of their own are copied over to the new functions.
-- Recut by issue 22: the functions, triggers and grants it changed are in sql/functions/ now.

alter table {{ s }}.jobs add column trace_context jsonb;
alter table {{ s }}.jobs add constraint jobs_trace_context_object
    check (trace_context is null or pg_catalog.jsonb_typeof(trace_context) = 'object') not valid;  -- validated by deploy
