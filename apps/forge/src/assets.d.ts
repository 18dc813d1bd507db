// Implementation files of the example tools, bundled as text (tsup `loader`).
declare module '*.py' {
  const text: string;
  export default text;
}
