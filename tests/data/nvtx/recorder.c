/* A minimal NVTX tool for tests: load it with NVTX_INJECTION64_PATH and every push/pop in any
 * domain is appended to the file named by NVTX_RECORD_FILE, one line each ("push <name>",
 * "push <name> <integer payload>", "pop").
 * Stands in for Nsight Systems on machines without it: the NVTX calls travel the same path. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nvtx3/nvToolsExt.h"

static FILE *record;
static int domain_storage;

static nvtxDomainHandle_t NVTX_API domain_create(const char *name) {
    (void)name;
    return (nvtxDomainHandle_t)&domain_storage;
}

static nvtxStringHandle_t NVTX_API register_string(nvtxDomainHandle_t domain, const char *text) {
    (void)domain;
    return (nvtxStringHandle_t)strdup(text);
}

static int NVTX_API push(nvtxDomainHandle_t domain, const nvtxEventAttributes_t *attributes) {
    (void)domain;
    const char *name = "?";
    if (attributes->messageType == NVTX_MESSAGE_TYPE_REGISTERED)
        name = (const char *)attributes->message.registered;
    else if (attributes->messageType == NVTX_MESSAGE_TYPE_ASCII)
        name = attributes->message.ascii;
    if (!record) return 0;
    if (attributes->payloadType == NVTX_PAYLOAD_TYPE_INT64)
        fprintf(record, "push %s %lld\n", name, (long long)attributes->payload.llValue);
    else if (attributes->payloadType == NVTX_PAYLOAD_TYPE_UNSIGNED_INT64)
        fprintf(record, "push %s %llu\n", name, (unsigned long long)attributes->payload.ullValue);
    else
        fprintf(record, "push %s\n", name);
    return 0;
}

static int NVTX_API pop(nvtxDomainHandle_t domain) {
    (void)domain;
    if (record) fputs("pop\n", record);
    return 0;
}

int NVTX_API InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_export_table) {
    const NvtxExportTableCallbacks *callbacks = get_export_table(NVTX_ETID_CALLBACKS);
    NvtxFunctionTable table;
    unsigned int size;
    if (!callbacks || !callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &table, &size)) return 0;
    *table[NVTX_CBID_CORE2_DomainCreateA] = (NvtxFunctionPointer)domain_create;
    *table[NVTX_CBID_CORE2_DomainRegisterStringA] = (NvtxFunctionPointer)register_string;
    *table[NVTX_CBID_CORE2_DomainRangePushEx] = (NvtxFunctionPointer)push;
    *table[NVTX_CBID_CORE2_DomainRangePop] = (NvtxFunctionPointer)pop;
    const char *path = getenv("NVTX_RECORD_FILE");
    if (path) {
        record = fopen(path, "w");
        if (record) setvbuf(record, NULL, _IOLBF, 0);
    }
    return 1;
}
