// Builds the demo page's script and styles into ../static/dist, which the
// signer embeds (go:embed): one bundle of Uppy (core, Dashboard, AWS S3)
// and @mintgate/client (api/js/src), and one stylesheet, so the page loads
// nothing from another host. Type-checks first. Run by deploy/local/web.sh.
import { execFileSync } from "node:child_process";
import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

import * as esbuild from "esbuild";

const here = dirname(fileURLToPath(import.meta.url));
const out = join(here, "..", "static", "dist");

execFileSync(process.execPath, [join(here, "node_modules", "typescript", "bin", "tsc"), "-p", join(here, "tsconfig.json")], {
  stdio: "inherit",
});
rmSync(out, { recursive: true, force: true });
mkdirSync(out, { recursive: true });
const result = await esbuild.build({
  entryPoints: { app: join(here, "src", "main.ts") },
  bundle: true,
  format: "esm",
  target: "es2020",
  minify: true,
  legalComments: "linked",
  outdir: out,
  metafile: true,
  logLevel: "warning",
});
// What went into the bundle, for a look (not embedded): node_modules/.meta.json.
writeFileSync(join(here, "node_modules", ".meta.json"), JSON.stringify(result.metafile));
for (const [file, o] of Object.entries(result.metafile.outputs)) {
  console.log(`demo page: ${file} ${(o.bytes / 1024).toFixed(0)} KiB`);
}
