-- Models as their frameworks save them (CONTRACT §3): the artifact's format (onnx,
-- graphdef, savedmodel, torchscript), its versions (ascending) and a SavedModel's
-- signatures ({name, method?, inputs, outputs}, or NULL). Models stored before are one
-- file, version 1; only a tensorflow one may be a GraphDef, which the server tells from
-- the file when it shows one with no format.
ALTER TABLE models ADD COLUMN format TEXT NOT NULL DEFAULT '';
ALTER TABLE models ADD COLUMN versions JSONB NOT NULL DEFAULT '[1]';
ALTER TABLE models ADD COLUMN signatures JSONB;
UPDATE models SET format = 'onnx' WHERE framework <> 'tensorflow';
