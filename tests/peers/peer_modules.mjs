// Where the npm peers live: scripts/peers installs them into
// <repo>/.peers/node (git-ignored), outside this folder, so plain `import`
// cannot find them. `peerRequire()` returns a `require` rooted there;
// EVIDENCE_WIRE_PEERS_NODE overrides the folder.

import { createRequire } from "node:module";
import { existsSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

export function peerRequire() {
  const here = dirname(fileURLToPath(import.meta.url));
  const folder = process.env.EVIDENCE_WIRE_PEERS_NODE ?? resolve(here, "../../.peers/node");
  if (!existsSync(join(folder, "node_modules"))) {
    console.error(`npm peers not installed in ${folder}; run scripts/peers`);
    process.exit(3);
  }
  return createRequire(join(folder, "package.json"));
}
