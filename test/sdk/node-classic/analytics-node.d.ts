// The little of analytics-node 6.x (untyped, CommonJS) that test/ingest/sdk-node-classic.test.ts uses.
declare module "analytics-node" {
  interface AxiosLike {
    interceptors: {
      request: { use(onFulfilled: (config: { url?: string; data?: unknown; headers?: Record<string, unknown> }) => unknown): void };
      response: { use(onFulfilled: (response: { status: number }) => unknown, onRejected: (error: { response?: { status: number; data: unknown } }) => unknown): void };
    };
  }
  type Callback = (err?: Error) => void;
  export default class Analytics {
    constructor(writeKey: string, options?: { host?: string; flushAt?: number; flushInterval?: number; retryCount?: number; timeout?: number; errorHandler?: (err: Error) => void });
    readonly axiosInstance: AxiosLike;
    identify(message: Record<string, unknown>, callback?: Callback): this;
    track(message: Record<string, unknown>, callback?: Callback): this;
    page(message: Record<string, unknown>, callback?: Callback): this;
    screen(message: Record<string, unknown>, callback?: Callback): this;
    group(message: Record<string, unknown>, callback?: Callback): this;
    alias(message: Record<string, unknown>, callback?: Callback): this;
    flush(): Promise<unknown>;
  }
}
