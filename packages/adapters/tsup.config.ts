import { packageBuild } from '../../config/tsup.js';

// One entry per framework: importing one adapter never loads another framework.
export default packageBuild({ entry: ['src/index.ts', 'src/ai.ts', 'src/openai-agents.ts', 'src/langchain.ts', 'src/mastra.ts'] });
