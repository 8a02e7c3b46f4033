// Where the npm peers live: scripts/peers installs them into
// <repo>/.peers/node (git-ignored), outside this folder, so plain `import`
// cannot find them. `peerRequire()` returns a `require` rooted there;
// EVIDENCE_WIRE_PEERS_NODE overrides the folder (the interop tests point it
// at .peers/node-old for the pinned old-generation TypeScript SDK).

import { createRequire } from "node:module";
import { existsSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

// The folder of the npm install the peers come from.
export function peerFolder() {
  const here = dirname(fileURLToPath(import.meta.url));
  return process.env.EVIDENCE_WIRE_PEERS_NODE ?? resolve(here, "../../.peers/node");
}

export function peerRequire() {
  const folder = peerFolder();
  if (!existsSync(join(folder, "node_modules"))) {
    console.error(`npm peers not installed in ${folder}; run scripts/peers`);
    process.exit(3);
  }
  return createRequire(join(folder, "package.json"));
}
