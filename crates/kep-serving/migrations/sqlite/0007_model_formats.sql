-- Models as their frameworks save them (CONTRACT §3): the artifact's format (onnx,
-- graphdef, savedmodel, torchscript), its versions (a JSON array, ascending) and a
-- SavedModel's signatures (a JSON array of {name, method?, inputs, outputs}, or NULL).
-- Models stored before are one file, version 1; only a tensorflow one may be a GraphDef,
-- which the server tells from the file when it shows one with no format.
ALTER TABLE models ADD COLUMN format TEXT NOT NULL DEFAULT '';
ALTER TABLE models ADD COLUMN versions TEXT NOT NULL DEFAULT '[1]';
ALTER TABLE models ADD COLUMN signatures TEXT;
UPDATE models SET format = 'onnx' WHERE framework <> 'tensorflow';
