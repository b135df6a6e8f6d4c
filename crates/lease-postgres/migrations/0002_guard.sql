-- Version 2: the resource-side guard (`fences` and `admit_fence`), so that a resource kept in
-- the same database needs nothing else.
-- Frozen: a released migration is never edited (its checksum is checked at every open).
CREATE TABLE IF NOT EXISTS {s}.fences (key text PRIMARY KEY, fence bigint NOT NULL CHECK (fence >= 0));
CREATE OR REPLACE FUNCTION {s}.admit_fence(p_key text, p_fence bigint) RETURNS bigint
LANGUAGE plpgsql AS $fn$
DECLARE
    seen bigint;
BEGIN
    IF p_key IS NULL OR p_key = '' THEN
        RAISE EXCEPTION 'lease guard: the key is empty' USING ERRCODE = '22023';
    END IF;
    IF p_fence IS NULL OR p_fence < 0 THEN
        RAISE EXCEPTION 'lease guard: % is not a fence', p_fence USING ERRCODE = '22023';
    END IF;
    INSERT INTO {s}.fences (key, fence) VALUES (p_key, p_fence) ON CONFLICT (key) DO NOTHING;
    SELECT fence INTO seen FROM {s}.fences WHERE key = p_key FOR UPDATE;
    IF p_fence < seen THEN
        RAISE EXCEPTION 'lease guard: fence % is stale for %, the resource has seen fence %',
            p_fence, p_key, seen
            USING ERRCODE = 'LF409', DETAIL = format('presented=%s current=%s', p_fence, seen);
    END IF;
    UPDATE {s}.fences SET fence = p_fence WHERE key = p_key AND fence < p_fence;
    RETURN p_fence;
END
$fn$;
